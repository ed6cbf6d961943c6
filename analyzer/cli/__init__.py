"""The ``kafkacap`` command line: click commands, the terminal summary, ``show``, and the Spark command.

``python -m analyzer.cli`` runs the same commands as the ``kafkacap`` script.
"""
