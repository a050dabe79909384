"""The build's output: the table contract and reader, writers, indexes, publishing, versioned roots."""
