"""Views of the run as a whole: the variant cards, timing, timeline, trends, compare,
side by side and the servers' logs."""
