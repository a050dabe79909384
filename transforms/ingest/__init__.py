"""Reading inputs: listing, formats, records, ReadDocuments; every unusable record a Rejected row."""
