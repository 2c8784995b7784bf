"""Rendering: text (Rich), markdown, JSON and HTML for plans, audits and replays."""
