"""The local stand-ins of outside providers (dev/local_server.py): the run commands and the
tests start them in place of LI.FI, Gnosis Pay, the ramps, CoinGecko, X and the Responses API."""
