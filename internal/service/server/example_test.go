package server_test

import (
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/sluicehq/sluice/internal/service/config"
	"github.com/sluicehq/sluice/internal/service/server"
	"github.com/sluicehq/sluice/memstore"
)

func Example() {
	cfg, err := config.Parse("sluice.yaml", []byte(`
limits:
  api-key: {algorithm: token_bucket, limit: 10, period: 1s}
`), config.Formats{})
	if err != nil {
		fmt.Println(err)
		return
	}
	h, err := server.New(cfg, memstore.New(memstore.Options{}), server.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/check", strings.NewReader(`{"limit":"api-key","key":"k1"}`)))
	fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	fmt.Print(rec.Body)
	// Output:
	// 200 "api-key";r=9;t=1
	// {"allowed":true,"limit":10,"remaining":9,"retry_after_ms":0,"reset_after_ms":100}
}
