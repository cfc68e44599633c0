"""Signed documents stored on patient requests through the API (the signed-documents
flow): upload links and registration (`attachments`), the limits on uploads (`uploads`)
and what a file's first bytes say it is (`file_types`)."""
