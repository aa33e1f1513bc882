"""The only layer with server sockets and tasks: acceptor, connections, handlers, config, daemon."""
