"""``grm view``: a local web page over run and eval directories (stdlib server, static files, JSON API).

Reads files only: nothing here imports torch, Ray or a judge; the layer contract keeps it that way.
"""
