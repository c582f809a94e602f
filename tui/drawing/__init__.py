"""How every view draws: trace text as literal data, numbers as a glance reads them,
colours from the theme, and scroll sizes changed without a relayout."""
