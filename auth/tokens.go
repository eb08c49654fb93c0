package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
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
// "{agent-a: token1, agent-b: token2}"). Names and tokens are taken as
// written: YAML 1.1 (sigs.k8s.io/yaml) read the token 0x1234567890abcdef
// as the number 1311768467294899695, and a token of 23 digits as
// 1.2345679e+22, so the token itself was refused, or said to be short. It
// returns them hashed, sorted by name.
func ParseTokens(data []byte) ([]Token, error) {
	var m map[string]string
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("want one \"name: token\" a line: %s", strings.ReplaceAll(err.Error(), "\n ", ""))
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
