"""Patient requests, the clinic's unit of work, in one place: what may be read of them
(`queries`) and every change made to them (`changes`: create, resolve, reopen, tag, note,
type, urgency), each a typed function with its actor and its time, audited in the
change's own transaction. The API's resources, the console's pages and the jobs all write
through these; how the API writes a request as JSON is the web layer's (`web/shapes.py`).
"""
