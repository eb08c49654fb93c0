package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"

	"sigs.k8s.io/yaml"
)

// Token is a bearer token a server accepts: the caller's name and the
// token's hash, as HashToken returns it. Only the hash is kept, so a
// configuration file or a memory dump does not give the token away.
type Token struct {
	Name string `json:"name"`
	Hash string `json:"hash"` // "sha256:" and the hex SHA-256 of the token
}

// HashToken returns the hash by which a Token names token:
// "sha256:" followed by the hex SHA-256 of the token, what
// `printf %s "$TOKEN" | sha256sum` prints.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// MinTokenLength is the shortest token ParseTokens accepts. Tokens are
// hashed without salt, which is safe only for tokens too long to guess,
// such as `openssl rand -hex 32`.
const MinTokenLength = 16

// ParseTokens reads tokens in the clear, as a tokens file or the
// TOOLWIRE_TOKENS environment variable holds them: a YAML mapping from
// caller name to token, one "name: token" a line (or in flow style,
// "{agent-a: token1, agent-b: token2}"). It returns them hashed, sorted by
// name.
func ParseTokens(data []byte) ([]Token, error) {
	var m map[string]string
	if err := yaml.UnmarshalStrict(data, &m); err != nil {
		return nil, fmt.Errorf("want one \"name: token\" a line: %w", err)
	}
	out := make([]Token, 0, len(m))
	for name, tok := range m {
		if name == "" {
			return nil, fmt.Errorf("a token has an empty name")
		}
		if len(tok) < MinTokenLength {
			return nil, fmt.Errorf("the token of %q is shorter than %d characters; use a long random one, such as `openssl rand -hex 32` prints", name, MinTokenLength)
		}
		out = append(out, Token{Name: name, Hash: HashToken(tok)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
