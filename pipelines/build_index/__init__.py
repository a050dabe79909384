"""The build job: flags and config, the stages' assembly, the run and its publishing, manifest, gates, engines' glue."""
