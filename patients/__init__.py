"""Patients and their records per clinic, as the clinic's systems and its callers meet
them: the directory the API searches and imports into (`directory`), and the patient a
caller's number is (`callers`). How the API writes a patient as JSON is the web layer's
(`web/shapes.py`)."""
