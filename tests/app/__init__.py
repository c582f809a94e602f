"""The Textual app and its widgets under App.run_test(), and golden screenshots."""
