"""File ▸ PACS: servers, query, retrieve and send."""
