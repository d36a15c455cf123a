"""Wire adapters: parse a wire into domain types and render verdicts back. No policy here."""
