"""A handed-off call becomes a request: the switchboard platform's API and recording links,
what a play answers, transcription and the callback numbers in a transcript."""
