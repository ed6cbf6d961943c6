"""The output tables: Arrow schemas with every column documented, rows to column batches, and the writers
that replace an output folder as a whole.
"""
