"""karpy"""
