-- one-row INSERT transaction into the table without a fence trigger.
INSERT INTO bench.rows_unfenced (payload, fence_token) VALUES ('payload', :tok);
