"""What every command shares: how it ends and reports a failure, its flags' parsing, its progress view."""
