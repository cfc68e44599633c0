"""Install-time and benchmark tools: building the whisper.cpp models (not imported by the service)."""
