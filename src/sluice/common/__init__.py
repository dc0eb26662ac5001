"""Value types, codecs, naming rules and config objects shared by every layer. No I/O here."""
