"""Bundled asyncio producer, consumer and admin client, and the command line."""
