"""The switchboard's routing checks (office hours, vacations, schedules) and the intake of
`recording-complete` hand-offs."""
