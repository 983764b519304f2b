"""Publishing results: the leaderboard (scoring, cache, static site) and the Hub's evaluation-results files."""
