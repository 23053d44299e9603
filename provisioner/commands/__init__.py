"""One thin module per subcommand."""
