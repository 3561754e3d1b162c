"""ecp.conformance"""
