"""HTML screens of the human side: labeling, screen, review, team, common."""
