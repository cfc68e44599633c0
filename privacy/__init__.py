"""Personal data's lifecycle: what is kept how long (`retention`), a patient erased
(`erasure`), a patient's copy of their data (`copy`), and the stored objects whose rows are
gone (`objects`). What each table, object, log and cache holds, and for how long, is
docs/data-protection.md."""
