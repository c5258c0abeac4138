-- API tokens: bearer tokens with scopes. Only the SHA-256 of a token is kept; the token
-- itself is shown once, when it is created. Revoking a token deletes its row.
CREATE TABLE api_tokens (
    id uuid PRIMARY KEY,
    name text NOT NULL,
    scopes text[] NOT NULL,
    secret_sha256 bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz
);
