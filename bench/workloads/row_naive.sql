-- one-row INSERT transaction into the table fenced by the naive PL/pgSQL trigger.
INSERT INTO bench.rows_naive (id, payload, fence_token) VALUES (:client_id, 'payload', :tok);
