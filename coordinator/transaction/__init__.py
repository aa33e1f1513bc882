"""The transaction coordinator: transactional ids as replicated state machines on `__transaction_state`."""
