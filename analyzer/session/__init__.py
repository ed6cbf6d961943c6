"""Kafka sessions: one connection's two framed directions, request/response matching by correlation id
(by order for Kafka 0.7), and the rows each exchange becomes.
"""
