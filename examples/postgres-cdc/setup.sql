-- The table the example reads, and nothing else: postgres-cdc-source
-- creates its publication and slot, postgres-sink its copy.
CREATE TABLE accounts (
    id bigint PRIMARY KEY,
    owner text NOT NULL,
    balance bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
