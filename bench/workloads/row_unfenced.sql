-- one-row INSERT transaction into the table without a fence trigger.
INSERT INTO bench.rows_unfenced (id, payload, fence_token) VALUES (:client_id, 'payload', :tok);
