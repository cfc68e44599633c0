"""Signed documents: patient requests and their attachments, the request catalog, the
patient directory (search and import) and file signatures."""
