package usage_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/service/usage"
)

// A streamed chat completion: the Meter passes the events through and
// finds the usage in the last one before [DONE].
func ExampleWatch() {
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":1,\"total_tokens\":13}}\n\n" +
		"data: [DONE]\n\n"
	resp := &http.Response{
		StatusCode: 200,
		Header:     http.Header{"Content-Type": {"text/event-stream"}},
		Body:       io.NopCloser(strings.NewReader(stream)),
	}
	m := usage.Watch(resp)
	b, _ := io.ReadAll(resp.Body) // what the client gets
	resp.Body.Close()
	fmt.Println(len(b) == len(stream))
	for _, spec := range []string{"openai", "openai:prompt", "header:X-Tokens-Used"} {
		n, why := m.Usage(usage.MustParse(spec))
		fmt.Println(spec, n, why)
	}
	// Output:
	// true
	// openai 13 reported
	// openai:prompt 12 reported
	// header:X-Tokens-Used 0 no_usage
}
