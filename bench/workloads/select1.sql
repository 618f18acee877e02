-- Ceiling: the cheapest round trip (no table, no commit work).
SELECT 1;
