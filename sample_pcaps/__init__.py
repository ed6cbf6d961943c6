"""Sample captures of real Kafka traffic and the script that records them (see README.md)."""
