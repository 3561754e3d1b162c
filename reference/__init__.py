"""ecp.reference"""
