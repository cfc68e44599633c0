"""Staff accounts of the console: who may log in, and how (passwords; later two-factor,
set-password links). Used by the console, onboarding and the operator CLI alike."""
