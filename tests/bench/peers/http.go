// The HTTP benchmark's Go side (tests/bench/http.sh):
//   http server PORT       net/http: /hello (text) and /json ({"message":"Hello, World!"})
//   http idle ADDR CONNS   opens CONNS keep-alive connections, makes one request on each,
//                          prints "ready" and holds them open until stdin closes
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
)

func server(port string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "Hello, World!")
	})
	mux.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"message": "Hello, World!"})
	})
	if err := http.ListenAndServe("127.0.0.1:"+port, mux); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func idle(addr string, n int) {
	conns := make([]net.Conn, 0, n)
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if _, err := io.WriteString(c, "GET /hello HTTP/1.1\r\nHost: bench\r\n\r\n"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		conns = append(conns, c)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
}

func main() {
	if len(os.Args) >= 3 && os.Args[1] == "server" {
		server(os.Args[2])
		return
	}
	if len(os.Args) >= 4 && os.Args[1] == "idle" {
		var n int
		fmt.Sscan(os.Args[3], &n)
		idle(os.Args[2], n)
		return
	}
	fmt.Fprintln(os.Stderr, "usage: http server PORT | http idle ADDR CONNS")
	os.Exit(2)
}
