"""Messages in sentences: what the banners, the series browser and the study details share."""

from __future__ import annotations


def join_messages(messages: list[str]) -> str:
    """Sentences joined without doubled punctuation ("a.; b." reads badly)."""
    return " ".join(m.strip() if m.strip().endswith((".", "!", "?")) else m.strip() + "." for m in messages if m.strip())
