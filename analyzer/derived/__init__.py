"""Tables derived from a whole run's rows (``groups``): computed after the analysis, from the output tables'
columns, so the CLI and the Spark job derive them alike."""
