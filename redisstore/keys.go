package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// maxReadable is the longest escaped key or policy name kept readable in a
// Redis key; longer ones are replaced by a hash.
const maxReadable = 64

// safeByte reports whether b appears as itself in an escaped key; every
// other byte, including '%', the hash tag braces, ':' and '#', is written
// as %XX.
func safeByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		b == '-' || b == '.' || b == '_' || b == '~' || b == '@' || b == '/'
}

// escapedLen returns the length of s escaped, or maxReadable+1 once it is
// known to exceed maxReadable.
func escapedLen(s string) int {
	if len(s) > maxReadable {
		return maxReadable + 1
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if safeByte(s[i]) {
			n++
		} else {
			n += 3
		}
	}
	return n
}

const hexDigits = "0123456789ABCDEF"

// appendText appends s to b as a piece of a Redis key that cannot be
// confused with any other: escaped when that is short, otherwise "#" and
// the first 128 bits of s's SHA-256 in hex. Escaping is injective and never
// produces '#', so the two forms cannot meet.
func appendText(b []byte, s string) []byte {
	if escapedLen(s) > maxReadable {
		sum := sha256.Sum256([]byte(s))
		b = append(b, '#')
		return hex.AppendEncode(b, sum[:16])
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if safeByte(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		}
	}
	return b
}

// key returns the Redis key of (policy, key):
//
//	<prefix>{k:<key text>}<policy fingerprint>
//
// The braces are a Redis Cluster hash tag: every policy of one key lands in
// the same slot, so one script can decide them together. The key text is
// escaped or hashed by appendText and never holds a brace, so no key can
// move another key's state or slot.
func (c *compiled) key(prefix, key string) string {
	return string(c.appendKey(make([]byte, 0, len(prefix)+4+min(len(key)*3, 2*maxReadable)+len(c.fp)), prefix, key))
}

// appendKey appends the Redis key of (policy, key) to b, as key returns it.
func (c *compiled) appendKey(b []byte, prefix, key string) []byte {
	b = append(b, prefix...)
	b = append(b, '{', 'k', ':')
	b = appendText(b, key)
	b = append(b, '}')
	return append(b, c.fp...)
}

// keyText returns the key text of key, the Redis key of a caller's key
// under c with prefix prefix (see key): the caller's key as appendText
// wrote it.
func keyText(key, prefix string, c *compiled) string {
	return key[len(prefix)+len("{k:") : len(key)-len("}")-len(c.fp)]
}

// fingerprint returns the policy part of a state key: the algorithm, the
// policy's numbers as given (a Burst of 0 stays 0) and its name, such as
// ":tb:100:1m0s:20:api" or ":fw:100:1h0m0s:0". Policies that differ in any
// of these keep separate state, as in the memory store; the fields are
// always all present, so a name cannot pass for a number.
func fingerprint(code string, limit int64, period string, burst int64, name string) string {
	b := []byte{':'}
	b = append(b, code...)
	b = append(b, ':')
	b = strconv.AppendInt(b, limit, 10)
	b = append(b, ':')
	b = append(b, period...)
	b = append(b, ':')
	b = strconv.AppendInt(b, burst, 10)
	if name != "" {
		b = append(b, ':')
		b = appendText(b, name)
	}
	return string(b)
}

// hashTag returns the text Redis Cluster hashes for key k: the part between
// the first '{' and the next '}', when not empty, else the whole key.
func hashTag(k string) string {
	i := strings.IndexByte(k, '{')
	if i < 0 {
		return k
	}
	j := strings.IndexByte(k[i+1:], '}')
	if j <= 0 {
		return k
	}
	return k[i+1 : i+1+j]
}

// slot returns the Redis Cluster hash slot of key k.
func slot(k string) uint16 {
	return crc16(hashTag(k)) & 16383
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), the checksum Redis
// Cluster uses for hash slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
