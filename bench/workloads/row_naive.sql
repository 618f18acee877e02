-- one-row INSERT transaction into the table fenced by the naive PL/pgSQL trigger.
INSERT INTO bench.rows_naive (payload, fence_token) VALUES ('payload', :tok);
