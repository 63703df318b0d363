package testkit

import (
	"reflect"
	"testing"
)

func TestBlocks(t *testing.T) {
	md := "# Title\n\n```yaml\na: 1\nb: 2\n```\ntext\n<!-- fragment -->\n```nginx \nlocation / {}\n```\n```\nunclosed\n"
	got := Blocks(md)
	want := []Block{
		{Lang: "yaml", Line: 4, Text: "a: 1\nb: 2\n"},
		{Lang: "nginx", Line: 10, Marker: "<!-- fragment -->", Text: "location / {}\n"},
		{Lang: "", Line: 13, Text: "unclosed\n\n"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Blocks() = %+v, want %+v", got, want)
	}
}
