"""The generator of ``dissectors/kafka/_generated/``: ``python -m tools.generate [--spec DIR] [--check]``.

:mod:`tools.generate.tables` reads Apache Kafka's JSON message definitions (made from the release jars by
:mod:`tools.kafka_definitions`) and writes the API, error, response-prefix and schema tables;
:mod:`tools.generate.extract_plans` writes, from the same schemas, the compiled extraction's Cython for the hot
APIs (``extract_plans.pxi``) and, for every other API, the programs the compiled interpreter walks
(``extract_programs.py``, data). A tool of the repository: the wheel carries what it wrote, not the generator.
"""
