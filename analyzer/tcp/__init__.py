"""TCP: the flow table that routes packets to connections, reassembly of each direction into ordered bytes and
gaps, the bulk path over runs of ordinary packets, and which process takes which connection (shards).

Interface: a half-stream hands its byte sink (``dissectors/sink.pxd``) ordered chunks and gaps; the flow
table tells it when the stream's start was seen, the connection when the stream ended.
"""
