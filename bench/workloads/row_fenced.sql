-- one-row INSERT transaction into the table fenced by lease.fence_trigger('row-lease');
-- all clients write under the one token of the lease's holder (:tok).
INSERT INTO bench.rows_fenced (payload, fence_token) VALUES ('payload', :tok);
