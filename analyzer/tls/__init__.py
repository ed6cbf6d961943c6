"""TLS between TCP reassembly and Kafka framing: record layer, handshake, key log, key schedule, decryption.

A TLS connection's two directions each get a decrypting byte sink (``dissectors/sink.pxd``) that reassembles
records, reads the handshake in clear, derives the record keys from the session secrets of an NSS key log
(``SSLKEYLOGFILE``) and hands the plaintext to the Kafka framer. Without the secrets the connection is only
counted, with the reason it could not be read.
"""
