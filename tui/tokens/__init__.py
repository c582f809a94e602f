"""A message token by token: the view, its lines and how tokens lay out in them."""
