"""TCP: the flow table that routes packets to connections, reassembly of each direction into ordered bytes and
gaps, the bulk path over runs of ordinary packets, and which process takes which connection (shards).

Interface: a half-stream hands its byte sink ordered chunks, gaps and the end of the stream.
"""
