"""A handed-off call becomes a request: the platform's API (the switchboard vendor's, which
hands out recording links) and link state, what a play answers, transcription, and the
numbers in a transcript."""
