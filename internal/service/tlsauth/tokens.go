package tlsauth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// MinTokenLen is the shortest token accepted: a token is a secret, and a
// short one can be guessed.
const MinTokenLen = 16

// MaxTokensFile is the largest tokens file read.
const MaxTokensFile = 1 << 20

// Tokens is a set of bearer tokens (listen.tokens_file). A request carries
// one in "Authorization: Bearer TOKEN", a gRPC call in its "authorization"
// metadata (TokenUnary). A nil *Tokens holds none. A Tokens
// is immutable and safe for concurrent use.
type Tokens struct {
	sums [][32]byte // SHA-256 of each token, in file order
}

// ParseTokens parses a tokens file: one token per line; blank lines and
// lines starting with # are skipped, and white space around a token is
// trimmed. A token is at least MinTokenLen visible ASCII characters. The
// same token twice is an error (a line pasted twice is a mistake worth
// seeing). Errors name the line, never a token.
func ParseTokens(data []byte) (*Tokens, error) {
	if len(data) > MaxTokensFile {
		return nil, fmt.Errorf("the file is larger than 1 MiB")
	}
	t := &Tokens{}
	seen := map[[32]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxTokensFile+1)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || s[0] == '#' {
			continue
		}
		if msg := CheckToken(s); msg != "" {
			return nil, fmt.Errorf("line %d: the token %s", line, msg)
		}
		sum := sha256.Sum256([]byte(s))
		if first, ok := seen[sum]; ok {
			return nil, fmt.Errorf("line %d: the same token as line %d", line, first)
		}
		seen[sum] = line
		t.sums = append(t.sums, sum)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t.sums) == 0 {
		return nil, fmt.Errorf("the file holds no token (one per line; # starts a comment)")
	}
	return t, nil
}

// CheckToken returns what is wrong with a token, or "". A token is at
// least MinTokenLen visible ASCII characters, so that it travels in an
// Authorization header unchanged.
func CheckToken(s string) string {
	if s == "" {
		return "is empty"
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return "must hold visible ASCII characters only (no spaces or control characters)"
		}
	}
	if len(s) < MinTokenLen {
		return fmt.Sprintf("is too short: use at least %d characters, like the output of `openssl rand -hex 32`", MinTokenLen)
	}
	return ""
}

// Len returns the number of tokens; 0 for nil.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.sums)
}

// Match reports whether the Authorization header value auth carries one
// of the tokens as "Bearer TOKEN". The time it takes depends on the
// number of tokens only, not on what auth holds or which token it
// matches: every token is compared, each through its SHA-256 so that the
// lengths do not show either.
func (t *Tokens) Match(auth string) bool {
	if t.Len() == 0 {
		return false
	}
	scheme, cred, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(cred)))
	match := 0
	for i := range t.sums {
		match |= subtle.ConstantTimeCompare(got[:], t.sums[i][:])
	}
	return match == 1
}

// TokenUnary is a gRPC interceptor that refuses, with Unauthenticated, the
// unary calls of the service named service (such as
// "envoy.service.ratelimit.v3.RateLimitService") whose "authorization"
// metadata does not carry one of the tokens as "Bearer TOKEN", as an HTTP
// request carries it in its Authorization header. tokens is called on
// every call, so that the tokens of the configuration in use apply; when
// it returns nil (no tokens file), every call passes. Calls of other
// services, such as the health service, pass.
func TokenUnary(service string, tokens func() *Tokens) grpc.UnaryServerInterceptor {
	prefix := "/" + service + "/"
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !strings.HasPrefix(info.FullMethod, prefix) {
			return handler(ctx, req)
		}
		t := tokens()
		if t == nil {
			return handler(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		if auth := md.Get("authorization"); len(auth) != 1 || !t.Match(auth[0]) {
			return nil, status.Error(codes.Unauthenticated, "this service needs a token of listen.tokens_file: send the metadata authorization: Bearer TOKEN")
		}
		return handler(ctx, req)
	}
}
