"""Path memory: what `advise` learned about each path, kept between runs
(docs/paths.md). entry: the records; store: the SQLite file; recall: from
an advice to an entry and back; where: which path a destination is on."""
