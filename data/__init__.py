"""Data the simulator reads: the optional SQLite response dataset (:mod:`data.dataset`,
stdlib ``sqlite3``) and shipped data files."""
