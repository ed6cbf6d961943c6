"""Capture files to packets: pcap and pcapng records (plain or compressed), link-layer, IP and TCP headers.

Interface: ``files.iter_packets`` / the chunked walk of ``chunks`` hand the tcp layer each TCP packet's capture
timestamp, flow key, sequence fields and a zero-copy view of its payload, and count every other record in
``CaptureStats``.
"""
